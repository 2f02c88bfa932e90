"""Stage 7, tools: the command line, reporters, conformance tests, benchmarks and the pytest plugin."""
