"""What both table generators (gen_command_table.py, gen_command_docs.py) share: the Redis
version they are pinned to and the check that a source tree is that version's."""
import os
import sys

REDIS_VERSION = "7.0.15"


def check_version(src):
    """Exit unless `src` (a tree's src/commands) belongs to Redis REDIS_VERSION."""
    try:
        with open(os.path.join(src, os.pardir, "version.h")) as f:
            ok = '#define REDIS_VERSION "%s"' % REDIS_VERSION in f.read()
    except OSError as e:
        sys.exit("%s: cannot read Redis's version: %s" % (sys.argv[0], e))
    if not ok:
        sys.exit("%s: %s is not Redis %s's source (tools/redis-source.sh gives it)"
                 % (sys.argv[0], src, REDIS_VERSION))
