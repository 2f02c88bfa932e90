"""Selection, pure: which backend runs an op where and why (select), overrides, and choices by token count."""
