# about: Handles shared tensors but forgets that Dropout keeps its mask.
# base: solution
# loses: ex2_1_test
# says: Dropout keeps its mask
# %% ex2_1_solution
def predict_saved_bytes(model, batch_size):
    width = model[0].in_features if isinstance(model[0], nn.Linear) else model[0].normalized_shape[0]
    total, saved = 0, False
    for layer in model:
        size = batch_size * width * 4
        if isinstance(layer, nn.ReLU):
            total, saved = total + size, True
        elif isinstance(layer, (nn.Linear, nn.GELU, nn.LayerNorm)):
            total += 0 if saved else size
            if isinstance(layer, nn.LayerNorm):
                total += 8 * batch_size
            if isinstance(layer, nn.Linear):
                width = layer.out_features
            saved = False
    return total
