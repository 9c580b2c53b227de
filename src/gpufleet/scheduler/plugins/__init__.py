"""Policy plugins, one module each; every module has a ``NAME`` and a ``Plugin`` class."""
