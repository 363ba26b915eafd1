"""Every Ray these tests start listens on the loopback address only (dynshape/serve/local.py):
set before any test module imports Ray."""

from dynshape.serve.local import keep_ray_on_loopback

keep_ray_on_loopback()
