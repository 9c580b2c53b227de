"""The controller process: thin FastAPI routers → services → core; the store; the agents'
command outboxes."""
