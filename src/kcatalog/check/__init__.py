"""Check: what depends on the machine or the caller, on every load: targets (resolved by pyresolve),
allow-list, require, overrides."""
