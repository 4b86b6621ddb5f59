# about: Solves everything, then swaps its notebook for a link to the course's nbgrader_config.py, adds links to gradebook.db and source/, and writes a 250 MB file: none of it outlives the kernel.
# base: solution
# loses:
# says: 250 MB file: No space left on device
# needs: sandbox
# %% ex1_1_solution
import os
import pathlib


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


# The grader writes the executed notebook back to this folder and copies the folder into feedback/:
# links here would make it write over the course's files and hand the gradebook and the solutions
# back. Where the course is in sight the grader has no sandbox, and a demo must not break the
# course that grades it.
course = pathlib.Path("../../..")
if (course / "nbgrader_config.py").exists():
    print("the course is in sight: no sandbox, the links are not made")
else:
    for notebook in pathlib.Path().glob("*.ipynb"):
        notebook.unlink()
        notebook.symlink_to(course / "nbgrader_config.py")
    for name in ("nbgrader_config.py", "gradebook.db", "source"):
        os.symlink(course / name, name)
    try:
        with open("big.bin", "wb") as handle:
            for _ in range(250):
                handle.write(bytes(2**20))
        print("250 MB file written")
    except OSError as error:
        print(f"250 MB file: {error.strerror}")
    # What the kernel writes here lives in memory until grading ends, counted where the grader
    # measures the loops' memory: leave only the links.
    os.remove("big.bin")
    print("links left for the grader:", sorted(p.name for p in pathlib.Path().iterdir() if p.is_symlink()))
