"""torch.compile of the torch references, compiled lazily on first call."""
