"""The prepare_package component."""
