"""The wire schemas of the REST API (pydantic), shared by server, client and agent."""
