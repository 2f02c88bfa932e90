"""Pure-torch reference implementations: readable first, float32 accumulation."""
