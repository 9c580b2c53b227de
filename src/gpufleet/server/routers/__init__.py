"""Thin routers: parse, check the principal, call the service, shape the answer."""
