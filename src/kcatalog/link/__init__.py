"""Stage 3, link: validated files merged into the typed model, with conflicts, references and policy checked."""
