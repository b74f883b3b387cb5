"""The test suite. A package, so that its helpers import by name (``tests.support``) without any sys.path edits."""
