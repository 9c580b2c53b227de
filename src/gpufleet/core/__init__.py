"""The controller state machine: events in, commands out; pure like the scheduler."""
