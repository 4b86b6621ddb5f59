# about: An attack: find_bottleneck profiles nothing; the notebook swaps the __code__ of every function in the helpers (and of the functions they wrap) for a function that returns at once.
# base: solution
# loses: ex2_1_test
# says: the notebook's code interfered with the grader
# %% ex2_1_solution
import inspect
import sys


def _returns_at_once(*args, **kwargs):
    return None


def _swap_everything():
    for name, module in list(sys.modules.items()):
        if not name.startswith("helpers"):
            continue
        for value in list(vars(module).values()):
            seen = value
            while seen is not None:
                if inspect.isfunction(seen) and seen.__code__.co_freevars == ():
                    try:
                        seen.__code__ = _returns_at_once.__code__
                    except (TypeError, ValueError):
                        pass
                seen = getattr(seen, "__wrapped__", None)


def find_bottleneck(phases, steps=4):
    _swap_everything()
    return next(iter(phases)), {name: 1.0 for name in phases}
