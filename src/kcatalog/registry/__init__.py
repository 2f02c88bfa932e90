"""The Catalog a load produces: a frozen value with pure queries, and its runtime for what imports or dispatches."""
