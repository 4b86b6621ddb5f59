# about: Predicts by measuring: deep-copies the model, trains the copy for one step with the named optimizer and counts its tensors, where the exercise asks for a prediction without running anything.
# base: solution
# loses: ex1_1_test
# says: ran the model (or a module of its own
# %% ex1_1_solution
import copy


def predict_training_bytes(model, optimizer_name):
    twin = copy.deepcopy(model)
    trained = [p for p in twin.parameters() if p.requires_grad]
    make = {"sgd": lambda: torch.optim.SGD(trained, lr=0.1),
            "sgd_momentum": lambda: torch.optim.SGD(trained, lr=0.1, momentum=0.9),
            "adam": lambda: torch.optim.Adam(trained, lr=1e-3)}[optimizer_name]
    optimizer = make()
    first = next(m for m in twin.modules() if isinstance(m, nn.Linear))
    dtype = next(twin.parameters()).dtype
    twin(torch.randn(2, first.in_features, dtype=dtype)).float().pow(2).mean().backward()
    optimizer.step()

    def size(tensors):
        return sum(t.numel() * t.element_size() for t in tensors)

    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {"parameters": size(twin.parameters()),
            "gradients": size(p.grad for p in twin.parameters() if p.grad is not None),
            "optimizer": size(state)}
