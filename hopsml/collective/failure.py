"""A communicator's failure protocol: the first failure wins, is remembered with the peer it blames, and its
cause goes to every peer on the control connections before this rank shuts its data connections down, so that
the other ranks fail at once with the same root cause instead of waiting for their timeout. Later operations
refuse to run (the experiment has to be restarted)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping

from hopsml.collective.peers import Peer
from hopsml.collective.timeout import TIMEOUT_ENV
from hopsml.collective.transport import PeerLost
from hopsml.errors import Blame, CollectiveError

logger = logging.getLogger(__name__)

Blamed = tuple[int | None, Blame | None]   # the peer a failure blames, and what it did


class Failure:
    """One rank's record of its communicator's first failure, and the abort that tells its peers."""

    def __init__(self, rank: int, peers: Mapping[int, Peer], timeout_s: float,
                 stop_data: Callable[[], None]) -> None:
        self._rank, self._peers, self._timeout_s = rank, peers, timeout_s
        self._stop_data = stop_data   # shuts the communicator's data path down (after the notices)
        self.message: str | None = None   # the first failure, as this rank raises it
        self.blamed: Blamed = (None, None)
        self.lock = threading.Lock()

    def from_peer(self, lost: PeerLost, label: str) -> str:
        """A peer was lost during `label`: record the first failure, tell the peers; returns the first cause."""
        with self.lock:
            if self.message is not None:
                return self.message
            me, peer = self._rank, lost.peer
            notice = None if lost.timed_out or lost.tampered else _read_cause(self._peers[peer].read_notice())
            blamed: Blamed
            if lost.tampered:
                blamed = (peer, Blame.TAMPERED)
                cause = message = (f"rank {me} refused a message during {label}: {lost.reason}. Something between "
                                   f"rank {me} and rank {peer} writes to their connection; the run stops, since "
                                   "nothing it receives can be trusted (check the network path between the hosts)")
            elif notice:
                # pass the first cause on unchanged, so that every rank names the rank that really failed
                cause, blamed = notice
                message = f"{cause} (rank {me} learned this from rank {peer}, which aborted)"
            elif lost.timed_out:
                blamed = (peer, Blame.STUCK)
                cause = message = (f"rank {me} timed out during {label}: rank {peer} made no progress for "
                                   f"{self._timeout_s:g} s; rank {peer} may be hung, stuck before the same call, "
                                   f"or on an unreachable host (raise {TIMEOUT_ENV} if it is just slow)")
            else:
                blamed = (peer, Blame.DIED)
                cause = message = (f"rank {me} lost its connection to rank {peer} ({lost.reason}) during {label}; "
                                   f"rank {peer} probably died: look at its log for the cause")
            self.abort(message, cause, blamed)
            return message

    def on_own(self, reason: str, label: str) -> CollectiveError:
        """This rank failed on its own (not through a peer) during `label`: abort, and the error to raise."""
        with self.lock:
            if self.message is None:
                self.abort(f"rank {self._rank}: {reason} (during {label})")
            return self.error(self.message or reason)

    def interrupted(self, label: str) -> None:
        """Something else ended the operation (an exception of the caller's, a KeyboardInterrupt): abort."""
        with self.lock:
            if self.message is None:
                self.abort(f"rank {self._rank} was interrupted during {label}")

    def error(self, message: str) -> CollectiveError:
        """The failure as an error that carries the blamed peer and what it did, as data."""
        peer, kind = self.blamed
        return CollectiveError(message, peer=peer, kind=kind)

    def abort(self, message: str, cause: str | None = None, blamed: Blamed = (None, None)) -> None:
        """Remember the failure, send its cause (and whom it blames) to every peer on the control connections,
        stop the data. Called with `lock` held."""
        if self.message is None:
            self.message, self.blamed = message, blamed
        logger.error("%s", message)
        notice = json.dumps({"cause": cause or message, "peer": blamed[0], "kind": blamed[1]})
        for peer in self._peers.values():
            peer.send_notice(notice)
        self._stop_data()  # after the notices: a rank woken by it reads this rank's notice
        for peer in self._peers.values():
            peer.shutdown()

    def lost_peer(self) -> int | None:
        """A peer that aborted or closed (it wrote to or closed its control connection), else None."""
        return next((rank for rank, peer in self._peers.items() if peer.signalled()), None)


def _read_cause(notice: str | None) -> tuple[str, Blamed] | None:
    """An abort notice's cause text and the (peer, kind) it blames; None when the peer sent none."""
    if notice is None:
        return None
    try:
        data = json.loads(notice)
        return str(data["cause"]), (data.get("peer"), Blame.of(data.get("kind")))
    except (ValueError, KeyError, TypeError):
        return notice, (None, None)
