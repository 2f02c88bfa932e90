"""The load cache: the linked model and its target checks stored by the files' contents, read back without parsing."""
