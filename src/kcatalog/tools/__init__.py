"""Tools: the command line, reporters, conformance tests, benchmarks and the pytest plugin."""
