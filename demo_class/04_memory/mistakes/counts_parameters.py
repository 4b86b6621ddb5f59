# about: Counts the weights that Linear saves for backward as activations.
# base: solution
# loses: ex2_1_test
# says: parameters are not activations
# %% ex2_1_solution
def predict_saved_bytes(model, batch_size):
    width = model[0].in_features if isinstance(model[0], nn.Linear) else model[0].normalized_shape[0]
    total, saved = 0, False
    for layer in model:
        size = batch_size * width * 4
        if isinstance(layer, nn.Linear):
            total += (0 if saved else size) + layer.weight.numel() * 4
            width, saved = layer.out_features, False
        elif isinstance(layer, nn.ReLU):
            total, saved = total + size, True
        elif isinstance(layer, nn.GELU):
            total, saved = total + (0 if saved else size), False
        elif isinstance(layer, nn.LayerNorm):
            total, saved = total + (0 if saved else size) + 8 * batch_size, False
        else:
            total, saved = total + size, False
    return total
