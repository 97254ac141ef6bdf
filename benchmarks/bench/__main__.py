"""bash scripts/bench (python -m benchmarks.bench): the options, then the run."""
from __future__ import annotations

import sys

from benchmarks.bench import options


def main(argv: list[str] | None = None) -> int:
    args = options.parser().parse_args(argv)
    if args.plan:
        from benchmarks.bench.plan import describe

        print(describe(args))
        return 0
    cluster_url = options.cluster_choice(args)
    # before anything imports Django: its settings come from the environment
    options.configure(cluster_url, galera=args.cluster and not args.cluster_url
                      and args.database == "galera")
    from benchmarks.bench.run import run

    return run(args, cluster_url)


if __name__ == "__main__":
    sys.exit(main())
