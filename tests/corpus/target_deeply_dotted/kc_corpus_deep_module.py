"""A module, not a package: nothing is below it."""
