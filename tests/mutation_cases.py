"""The mutation check's table: each deliberate fault and the tests that must catch it
(run by tests/mutations.py)."""

from __future__ import annotations

from dataclasses import dataclass

COMPILED_SUFFIXES = (".pyx", ".pxi", ".pxd")
DUAL = "tests/test_dual_backends.py"


@dataclass(frozen=True)
class Mutation:
    """One deliberate fault: ``old`` (found exactly once in ``path``) becomes ``new``."""

    name: str
    breaks: str  # one line: what the fault breaks
    path: str  # relative to the repository root
    old: str
    new: str
    tests: tuple[str, ...]  # pytest arguments: node ids, files, "-k", expressions

    @property
    def compiled(self) -> bool:
        return self.path.endswith(COMPILED_SUFFIXES)


MUTATIONS: list[Mutation] = [
    Mutation(
        "combine-weights-swapped",
        "compiled combine kernel: two neighbors' weights exchanged (a weight transposed)",
        "fogsim/_core/_kernels.pyx",
        "                dst[c] = <store_t>(w0 * x0[c] + a * s0[c] + b * s1[c])\n",
        "                dst[c] = <store_t>(w0 * x0[c] + b * s0[c] + a * s1[c])\n",
        ("tests/test_core_kernels.py",),
    ),
    Mutation(
        "fallback-combine-order-changed",
        "pure-Python twin of csr_combine sums neighbors in reverse order (bits differ)",
        "fogsim/_core/_fallback.py",
        "        for s in range(cols.shape[1]):\n"
        "            acc += np.multiply(ws[:, s, None], np.take(x, cols[:, s], axis=0), "
        "dtype=_F64)\n",
        "        for s in reversed(range(cols.shape[1])):\n"
        "            acc += np.multiply(ws[:, s, None], np.take(x, cols[:, s], axis=0), "
        "dtype=_F64)\n",
        ("tests/test_core_kernels.py",),
    ),
    Mutation(
        "plan-weights-transposed",
        "simulator combines with W^T instead of W for non-circulant topologies",
        "fogsim/backends/sim/_plan.py",
        "    return CsrPlan(sw, *topo.offdiag_csr(), pattern=topo)\n",
        "    return CsrPlan(sw, *transpose(*topo.offdiag_csr(), topo.size), pattern=topo)\n",
        ("tests/test_sim_ops.py",),
    ),
    Mutation(
        "uniform-weight-denominator-off-by-one",
        "uniform weights: neighbors get 1/(degree+2), not 1/(degree+1) (self takes the rest)",
        "fogsim/topology/_exact.py",
        "    k = np.rint(float(_ONE) / (d + 1.0)).astype(np.int64)\n",
        "    k = np.rint(float(_ONE) / (d + 2.0)).astype(np.int64)\n",
        ("tests/test_topology_core.py", "tests/test_sim_ops.py"),
    ),
    Mutation(
        "schedule-step-off-by-one",
        "periodic dynamic schedules yield step t+1's topology at step t",
        "fogsim/topology/schedules.py",
        "        yield DynamicStep(t, steps[t % len(steps)])\n",
        "        yield DynamicStep(t, steps[(t + 1) % len(steps)])\n",
        ("tests/test_topology_schedules.py",),
    ),
    Mutation(
        "one-peer-schedule-off-by-one",
        "one_peer_schedule of a non-circulant topology sends to out-neighbor t+1 at step t",
        "fogsim/topology/schedules.py",
        "        receivers = ordered_out[first + t % sender_degrees]\n",
        "        receivers = ordered_out[first + (t + 1) % sender_degrees]\n",
        ("tests/test_topology_schedules.py",),
    ),
    Mutation(
        "random-matching-same-pairs-every-step",
        "random_matching draws every step from step 0's seed: the same pairs forever",
        "fogsim/topology/schedules.py",
        "np.random.SeedSequence(entropy, spawn_key=(t,))",
        "np.random.SeedSequence(entropy, spawn_key=(0,))",
        ("tests/test_topology_schedules.py",),
    ),
    Mutation(
        "sim-topology-check-skipped",
        "simulator: send and receive sets of a dynamic call are not compared",
        "fogsim/backends/sim/_plan.py",
        "    src, dst = names\n    if np.array_equal(recv[0], send[0])",
        "    src, dst = names\n    if True or np.array_equal(recv[0], send[0])",
        ("tests/test_sim_errors.py", "tests/test_sim_ops.py"),
    ),
    Mutation(
        "mpi-topology-check-skipped",
        "MPI: a rank does not compare who says they send to it with its src_weights",
        "fogsim/backends/_runtime/plan.py",
        "    senders = np.flatnonzero(got[:, 0])\n",
        "    senders = np.asarray(plan.srcs)\n",
        (DUAL, "-k", "test_mpi and mismatched and 3]"),
    ),
    Mutation(
        "fusion-entry-bytes-shifted",
        "compiled fusion: a float64 tensor after the first is read 8 bytes early",
        "fogsim/_core/_fusion.pyx",
        "<const double*>(<const char*>rv.buf + e.offset),",
        "<const double*>(<const char*>rv.buf + e.offset - (8 if e.offset else 0)),",
        ("tests/test_core_fusion.py",),
    ),
    Mutation(
        "handle-second-wait-not-refused",
        "compiled handles: waiting on a released handle does not raise",
        "fogsim/_core/_handles.pyx",
        "        if self._released:\n            raise ValueError(",
        "        if False:\n            raise ValueError(",
        ("tests/test_core_handles.py",),
    ),
    Mutation(
        "sim-win-put-applied-twice",
        "simulator: win_put sends (and scales by self_weight) twice",
        "fogsim/backends/sim/_windows.py",
        '        return self._push("win_put", PUT, x, name, self_weight, dst_weights, '
        "require_mutex)\n",
        '        self._push("win_put", PUT, x, name, self_weight, dst_weights, require_mutex)\n'
        '        return self._push("win_put", PUT, x, name, self_weight, dst_weights, '
        "require_mutex)\n",
        ("tests/test_sim_windows.py",),
    ),
    Mutation(
        "asynchrony-delays-ignored",
        "simulated asynchrony: every window message lands at once, whatever delay was drawn",
        "fogsim/backends/sim/_windows.py",
        "        delays = self._asynchrony.draw_delays(edges.size)\n",
        "        self._asynchrony.draw_delays(edges.size)\n        delays = None\n",
        ("tests/test_asynchrony.py",),
    ),
    Mutation(
        "window-weight-cast-lost",
        "simulator win_put/accumulate: float32 values scaled by float64 weights (cast lost)",
        "fogsim/backends/sim/_windows.py",
        "        vals = flat[src] * w.astype(win.dtype)[:, None]\n",
        "        vals = flat[src] * w[:, None]\n",
        ("tests/test_sim_windows.py",),
    ),
    Mutation(
        "mpi-mutex-released-early",
        "runtime windows (MPI): a mutex is released as soon as it is taken, before the block",
        "fogsim/backends/_runtime/windows.py",
        "        self.acquire(ranks)\n        try:\n            yield\n        finally:\n"
        "            self.release(ranks)\n",
        "        self.acquire(ranks)\n        self.release(ranks)\n        yield\n",
        (DUAL, "-k", "test_mpi and mutex and 2]"),
    ),
    Mutation(
        "sim-push-sum-p-not-sent",
        "simulator windows: push-sum's associated weight p does not travel with the value",
        "fogsim/backends/sim/_windows.py",
        "        pvals = w * win.p[src] if self._with_p else None\n",
        "        pvals = None\n",
        ("tests/test_sim_windows.py",),
    ),
    Mutation(
        "mpi-push-sum-p-not-sent",
        "runtime windows (MPI): push-sum's associated weight p is not put to the neighbor",
        "fogsim/backends/_runtime/windows.py",
        "                    win.pwin.accumulate(pbuf, j, 1 + slot, replace)\n",
        "                    pass\n",
        (DUAL, "-k", "test_mpi and push_sum and 2]"),
    ),
    Mutation(
        "sim-hierarchical-skips-machine-step",
        "simulator: hierarchical_neighbor_allreduce returns machine means, unmixed",
        "fogsim/backends/sim/_machines.py",
        "        if mean.shape[1]:\n            apply_plan(plan, mean, mixed)\n",
        "        mixed[...] = mean\n",
        ("tests/test_hierarchy.py",),
    ),
    Mutation(
        "mpi-hierarchical-skips-machine-step",
        "runtime (MPI): hierarchical_neighbor_allreduce skips the exchange between machines",
        "fogsim/backends/_runtime/machines.py",
        "            out, error = exchange_between_machines(\n"
        "                self._machine_world(),\n"
        "                mean,\n"
        "                self_weight,\n"
        "                src_machine_weights,\n"
        "                dst_machine_weights,\n"
        "                enable_topo_check,\n"
        "            )\n",
        "            out, error = mean.copy(), None\n",
        ("tests/test_hierarchy_mpi.py",),
    ),
    Mutation(
        "mpi-decomposed-drops-a-stage",
        "runtime (MPI): the decomposed all-reduce skips the all-gather of its first stage",
        "fogsim/backends/_runtime/machines.py",
        "        for stage, bounds, d in reversed(done):  # all-gather\n",
        "        for stage, bounds, d in reversed(done[1:]):  # all-gather\n",
        ("tests/test_hierarchy_mpi.py",),
    ),
    Mutation(
        "sim-allreduce-average-by-n-minus-1",
        "simulator: allreduce(average=True) divides by n - 1",
        "fogsim/backends/sim/_collectives.py",
        "        out[...] = total / self._n if average else total\n",
        "        out[...] = total / max(self._n - 1, 1) if average else total\n",
        ("tests/test_sim_ops.py",),
    ),
    Mutation(
        "mpi-allreduce-average-by-n-minus-1",
        "MPI: allreduce(average=True) divides by n - 1",
        "fogsim/backends/mpi/_collectives.py",
        "                np.divide(out, n, out=out)\n",
        "                np.divide(out, max(n - 1, 1), out=out)\n",
        (DUAL, "-k", "test_mpi and collectives and 2]"),
    ),
    Mutation(
        "mpi-broadcast-wrong-root",
        "MPI: broadcast sends the value of the rank after root_rank",
        "fogsim/backends/mpi/_collectives.py",
        "        req = self.comm.Ibcast(out, root=root)\n",
        "        req = self.comm.Ibcast(out, root=(root + 1) % self.size)\n",
        (DUAL, "-k", "test_mpi and collectives and 2]"),
    ),
    Mutation(
        "optim-communicates-every-step",
        "optimizers communicate at every step, ignoring num_steps_per_communication",
        "fogsim/optim/_base.py",
        "        return self._communication_type is not CommunicationType.empty and "
        "self._round_due()\n",
        "        return self._communication_type is not CommunicationType.empty\n",
        ("tests/test_optim_bluefog.py",),
    ),
    Mutation(
        "timeline-op-span-never-closed",
        "compiled trace recorder: an op's end event is never written",
        "fogsim/_core/_trace.pyx",
        '        self.add(b"E", tid, t, -1, -1, 0)\n',
        "        pass\n",
        ("tests/test_timeline.py",),
    ),
    Mutation(
        "timeline-activity-never-closed",
        "timeline: end() of a user activity writes no end event",
        "fogsim/_timeline_write.py",
        '        t = self._ns(ts)\n        self._rec.append("E", tid, t, None, None)\n',
        "        t = self._ns(ts)\n",
        ("tests/test_timeline.py",),
    ),
    Mutation(
        "faults-link-drop-never-applied",
        "fault injection: link_drop never loses a message",
        "fogsim/faults.py",
        "(self.rng.random(len(data)) < self.link_drop)",
        "(self.rng.random(len(data)) < 0.0)",
        ("tests/test_faults.py",),
    ),
    Mutation(
        "faults-lost-weight-not-moved",
        "fault injection: a lost message's weight vanishes instead of going where "
        "dropped_weight says (rows no longer sum to 1)",
        "fogsim/faults.py",
        "        moved = np.where(lost, data, 0.0)\n",
        "        moved = np.zeros_like(data)\n",
        ("tests/test_faults.py",),
    ),
    Mutation(
        "spmd-rendezvous-wrong-share",
        "SPMD threads: each agent gets the next agent's share of a collective's result",
        "fogsim/spmd/_world.py",
        "            return value[rank]\n",
        "            return value[(rank + 1) % self.size]\n",
        ("tests/test_spmd.py",),
    ),
    Mutation(
        "stall-guard-never-fires",
        "stall guard never reports a rank that waits past the time-out",
        "fogsim/_stall.py",
        "            if not reported and now >= deadline:\n",
        "            if False:\n",
        # not test_the_guard_raises_...: its wait never ends unless the guard raises
        ("tests/test_stall.py::test_warn_only_reports_once_and_keeps_waiting",),
    ),
    Mutation(
        "check-modes-ignores-shapes",
        "mode checker: inputs and outputs of different shapes are not told apart",
        "fogsim/_checkmodes/_compare.py",
        "    if a.shape != b.shape:\n",
        "    if False:\n",
        ("tests/test_checkmodes.py", "-k", "broadcasting"),
    ),
    Mutation(
        "shape-guard-silent",
        "simulator guard: per-agent values that grew an agent axis are never reported",
        "fogsim/backends/sim/_shapes.py",
        "        if self._n == 1 or not per or per[0] != self._n or per[1:] not in "
        "self.local_shapes:\n",
        "        if True:\n",
        ("tests/test_checkmodes.py", "-k", "warns_once"),
    ),
    Mutation(
        "weight-check-never-fires",
        "weights that are neither row- nor column-stochastic pass the check",
        "fogsim/_weightcheck.py",
        "    row = _first_bad(rows)\n",
        "    row = None\n",
        ("tests/test_weight_checks.py", "-k", "not mpi"),
    ),
    Mutation(
        "spmd-numpy-random-shared",
        "SPMD agents draw numpy's global random numbers from one shared state",
        "fogsim/spmd/_random.py",
        "    if not _local.agent:\n        return _global_rand\n",
        "    if True:\n        return _global_rand\n",
        ("tests/test_spmd_random.py", "-k", "numpy"),
    ),
    Mutation(
        "launcher-size-not-noticed",
        "init(size=) under a launcher is ignored without the one-line notice",
        "fogsim/backends/_base.py",
        "    if size != n and rank == 0:\n",
        "    if False:\n",
        ("tests/test_launch_size.py",),
    ),
    Mutation(
        "mpi-world-leaks-a-communicator",
        "MPI: shutdown() leaves the neighbor ops' duplicate communicator unfreed",
        "fogsim/backends/mpi/_neighbor.py",
        "        self._p2p.free()\n",
        "        pass\n",
        ("tests/test_lifecycle.py", "-k", "mpi"),
    ),
    Mutation(
        "torch-world-keeps-its-group",
        "torch: the transport still names the world's destroyed gloo group (threads linger)",
        "fogsim/backends/torchdist/_backend.py",
        "        self.transport.free()  # self.group\n",
        "        _world.destroy_groups(self.group)\n",
        ("tests/test_lifecycle.py", "-k", "torch"),
    ),
    Mutation(
        "mpi-mutex-wait-unguarded",
        "runtime windows (MPI): a rank waits for a held mutex without the stall guard (forever)",
        "fogsim/backends/_runtime/windows.py",
        "        self.guard.wait(free, block, held)\n",
        "        block()\n",
        ("tests/test_stall.py", "-k", "window_mutex"),
    ),
    Mutation(
        "fogrun-sigterm-blames-a-rank",
        "fogrun told to end (SIGTERM) names a rank as the one that ended the job",
        "fogsim/run/_launch.py",
        "        if job.terminated is not None:  # no rank ended the job: fogrun did, as told\n",
        "        if False:\n",
        ("tests/test_fogrun_noise.py", "-k", "told_to_end"),
    ),
]
