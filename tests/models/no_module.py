import torch


class NotAModel(torch.nn.Module):
    pass
