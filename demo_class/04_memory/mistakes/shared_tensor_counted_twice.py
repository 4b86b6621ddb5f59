# about: Adds what every layer saves, so ReLU's output, also the next layer's input, counts twice.
# base: solution
# loses: ex2_1_test
# says: count it once
# %% ex2_1_solution
def predict_saved_bytes(model, batch_size):
    width = model[0].in_features if isinstance(model[0], nn.Linear) else model[0].normalized_shape[0]
    total = 0
    for layer in model:
        total += batch_size * width * 4
        if isinstance(layer, nn.LayerNorm):
            total += 2 * batch_size * 4
        if isinstance(layer, nn.Linear):
            width = layer.out_features
    return total
