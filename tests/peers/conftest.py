"""The peers' own test suites (tests/peers/<peer>/) run under the peer's own
pytest configuration, with that folder as rootdir (``tox -e peers-reproject``),
never as part of clgrid's suite: collecting them from tests/ would run them
under clgrid's configuration and fixtures instead."""

collect_ignore_glob = ["*"]
