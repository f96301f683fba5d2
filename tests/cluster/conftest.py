"""What the cluster tests share: two namespace hosts where this machine can make them, else two workers on
this one (a test module that needs more of its workers, as test_shipped_environment does, defines its own)."""

import namespace_hosts
import pytest


@pytest.fixture
def cluster(tmp_path):
    """(master URL, the daemons' environment, the driver's address, whether the hosts are namespace hosts)."""
    with namespace_hosts.two_hosts_or_this_one(tmp_path) as found:
        yield found
