"""Browser tests of the built site and the fixture repositories they (and other tests) build."""
