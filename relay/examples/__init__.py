"""The example tools, shipped inside the package so that `relay demo` and `--tools
relay.examples.tools` work wherever relay is installed, with no checkout.

`examples/` at the repository root is the same files, kept for reading; a test
(tests/packaging/test_examples_copy.py) fails when the two differ.
"""
