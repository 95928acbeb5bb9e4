"""What the compose scenarios' app scripts share: the list of failed checks, the MULTI/EXEC
event write whose loss the scenarios count, and the command-line entry point (the script's
exit status says whether every check held)."""

import sys

# Checks that failed; a script's run fails when it is not empty.
failures = []


def write_event(conn, i):
    """Event i in one transaction: ZADD lb:events and HSET events. A reply other than both
    fields added is a failed check; an exception means the outcome is unknown."""
    pipe = conn.pipeline(transaction=True)
    pipe.zadd("lb:events", {f"e{i}": i})
    pipe.hset("events", f"e{i}", str(i))
    res = pipe.execute()
    if res != [1, 1]:
        failures.append(f"EXEC for e{i} replied {res}")


def main(commands, usage):
    """Run the subcommand named by the first argument (`commands` maps names to functions of
    the remaining arguments), then exit 1 if any check failed."""
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    run = commands.get(cmd)
    if run is None:
        raise SystemExit(usage)
    run(*sys.argv[2:])
    if failures:
        print(f"{cmd}: {len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print(f"{cmd}: ok", flush=True)
