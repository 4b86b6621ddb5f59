# about: Correct, another style: one forward hook per leaf built with functools.partial over a module-level recorder, every handle's remove registered on a contextlib.ExitStack, no no_grad.
# base: solution
# loses:
# %% ex2_1_solution
import contextlib
import functools


def _record(report, name, _module, _inputs, output):
    report[name] = output.dtype          # a leaf seen again keeps its place, takes the new dtype


def autocast_audit(model, x, dtype):
    report = {}
    leaves = [(name, module) for name, module in model.named_modules()
              if len(list(module.children())) == 0]
    with contextlib.ExitStack() as stack:
        for name, module in leaves:
            handle = module.register_forward_hook(functools.partial(_record, report, name))
            stack.callback(handle.remove)
        with torch.autocast(x.device.type, dtype=dtype):
            model(x)
    return report
