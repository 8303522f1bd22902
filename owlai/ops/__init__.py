"""Operations state shared by every process: sweep leases and process
heartbeats, in the database (the one store every web, worker and beat process
already reaches). Lowest layer: imports Django only."""
