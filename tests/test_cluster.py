"""The cluster path: the same exercise code across two torchrun agents, as on two nodes, over loopback.

Two `torchrun --nnodes=2 --nproc-per-node=2` agents meet at one address on 127.0.0.1, as two nodes of a cluster
would at the head node's. The rendezvous is torchrun's static one (`--master-addr`, `--node-rank`), as under Slurm:
with the c10d rendezvous the agent that hosts the store may finish first and leave the other agent polling a closed
store (a RendezvousConnectionError after every rank succeeded). Each of the 4 ranks runs `launch(...)` (which,
under torchrun, joins torchrun's group instead of forking) with the course's reference ring all-reduce (the ring
students build in lab 02, pipelined) and compares every rank's result with the single-process sum.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.common import ROOT, free_port

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path

    import torch
    import torch.distributed as dist

    from benchmark.reference import ring_all_reduce
    from utils.launch import launch, rank_device

    NUMEL = 1003  # not a multiple of 4: uneven chunks


    def ring() -> torch.Tensor:
        tensor = torch.arange(NUMEL, dtype=torch.float64, device=rank_device()) * (dist.get_rank() + 1)
        ring_all_reduce(tensor)
        return tensor


    results = launch(ring, 4, timeout=60)  # every rank gets every rank's result
    expected = torch.arange(NUMEL, dtype=torch.float64) * sum(r + 1 for r in range(4))  # one process
    wrong = [r for r, got in enumerate(results) if not torch.equal(got, expected)]
    Path(sys.argv[1], f"rank{dist.get_rank()}").write_text(f"wrong on ranks {wrong}" if wrong else "ok")
""")


def test_reference_ring_across_two_torchrun_agents(tmp_path: Path) -> None:
    script = tmp_path / "ring.py"
    script.write_text(SCRIPT)
    torchrun = Path(sys.executable).with_name("torchrun")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    agents = [subprocess.Popen([str(torchrun), "--nnodes=2", "--nproc-per-node=2", f"--node-rank={node}",
                                "--master-addr=127.0.0.1", f"--master-port={port}", "--max-restarts=0",
                                str(script), str(tmp_path)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for node in (0, 1)]
    try:
        for agent in agents:
            agent.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pass  # reported below, with what the agents printed
    finally:
        for agent in agents:
            agent.kill()
    logs = [agent.communicate()[0] for agent in agents]
    assert [a.returncode for a in agents] == [0, 0], "\n-----\n".join(log[-3000:] for log in logs)
    verdicts = {p.name: p.read_text() for p in tmp_path.glob("rank*")}
    assert verdicts == {f"rank{r}": "ok" for r in range(4)}, verdicts
