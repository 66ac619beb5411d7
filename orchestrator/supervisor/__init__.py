"""`turntaker serve --workers N`: N realtime processes behind one nginx, sharing one Triton.

- `workers`: the supervisor itself (its `run`); `processes`: its process plumbing.
- `nginx_conf`: deploy/nginx.conf rendered for the workers (which worker a connection goes to).
- `respawn`: `RespawnSchedule`, when a dead worker starts again; `liveness`: `Liveness`,
  whether a running worker is alive or hung.
"""
