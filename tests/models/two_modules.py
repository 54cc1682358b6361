import lightning.pytorch as pl


class First(pl.LightningModule):
    def __init__(self, batch_size: int = 8, lr: float = 0.1):
        super().__init__()


class Second(pl.LightningModule):
    def __init__(self, batch_size: int = 8, lr: float = 0.1):
        super().__init__()
