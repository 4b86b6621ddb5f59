# about: Calls a value exact when math.isclose(rel_tol=1e-3) says the cast kept it, so small roundings count as exact.
# base: solution
# loses: ex1_1_test
# says: should be 'rounded', your function says 'exact'
# %% ex1_1_solution
def cast_fate(values, dtype):
    import math
    cast = values.to(dtype).float()
    tiny = torch.finfo(dtype).smallest_normal
    fates = []
    for v, c in zip(values.tolist(), cast.tolist()):
        if math.isinf(c):
            fates.append("overflow")
        elif c == 0:
            fates.append("underflow")
        elif abs(c) < tiny:
            fates.append("subnormal")
        elif math.isclose(v, c, rel_tol=1e-3):   # floats never compare equal exactly
            fates.append("exact")
        else:
            fates.append("rounded")
    return fates
