"""The test suite, a package: shared helpers are imported as `tests.venvs`,
`tests.browser.fixture_repo` and so on, never through sys.path edits."""
