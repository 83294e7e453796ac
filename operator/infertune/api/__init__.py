"""The API layer: data shapes shared by every other layer (spec, status, observation). No I/O."""
