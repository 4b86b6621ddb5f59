# about: Takes finfo.tiny (the smallest normal) for the smallest number: subnormals become "underflow".
# base: solution
# loses: ex1_1_test
# says: should be 'subnormal'
# %% ex1_1_solution
def cast_fate(values, dtype):
    info = torch.finfo(dtype)
    fates = []
    for v in values.tolist():
        if abs(v) > info.max:
            fates.append("overflow")
        elif abs(v) < info.tiny:
            fates.append("underflow")
        elif torch.tensor(v).to(dtype).item() == v:
            fates.append("exact")
        else:
            fates.append("rounded")
    return fates
