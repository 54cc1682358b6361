import lightning.pytorch as pl

class Broken(pl.LightningModule:
    pass
