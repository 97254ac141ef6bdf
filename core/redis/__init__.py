"""The Redis ground every app's Redis module stands on, one module per
concept; callers import from the module a name lives in.

- `keys`: the project's key names (the prefix, hash tags) and a reply's text
- `errors`: what a call raises, and whether it says the call surely did not run
- `connection`: which Redis (one through django-redis, or a cluster) and the
  connections whose failed connect says so
- `cluster`: the cluster client, its timeouts and retries, reading its layout again
- `shards`: one Redis or each primary of a cluster, and their slot tags
- `instance`: a new Redis instance is not trusted until it was checked
- `lines`: script calls on a lower layer of redis-py (one Redis)
- `cluster_calls`: script calls on a cluster, sent again only where they surely did not run
- `calls`: script calls sent together (`Call`, `run_together`)
- `scripts`: the loader of a folder of Lua scripts (`Scripts`, `GuardedScript`)
"""
