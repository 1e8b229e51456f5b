"""The observatory's tests, in folders by the floor of the package they check (docs/development.md, "The test suite")."""
