"""Stage 6, select and dispatch: which backend runs where and why, and the hot-path op handles."""
