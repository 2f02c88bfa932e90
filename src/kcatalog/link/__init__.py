"""Link: validated files merged into the typed model, with conflicts, references and policy checked."""
