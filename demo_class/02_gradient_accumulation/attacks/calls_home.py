# about: Solves everything, and tries every TCP port that listens on the grader's loopback (and the usual ones: ssh, a database, Redis, Dask, Jupyter): the kernel has no network.
# base: solution
# loses:
# says: services reached on the grader's machine: none
# needs: sandbox
# %% ex1_1_solution
import os
import socket


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    """One epoch of gradient accumulation; returns the mean loss of each cycle (floats)."""
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be at least 1, got {accum_steps}")
    cycle_losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            cycle_loss = 0.0
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        cycle_loss = cycle_loss + loss.detach()
        if (index + 1) % accum_steps == 0:
            optimizer.step()
            cycle_losses.append(cycle_loss.item())
    return cycle_losses


def listening_ports():
    """Ports in LISTEN state in /proc/net/tcp*, but for the sockets of this kernel itself."""
    own = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            own.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and f"socket:[{fields[9]}]" not in own:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


reached = []
for port in sorted(listening_ports() | {22, 80, 443, 5432, 6379, 8786, 8787, 8888}):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            reached.append(port)
    except OSError:
        pass
print("services reached on the grader's machine:", ", ".join(map(str, reached)) or "none")
