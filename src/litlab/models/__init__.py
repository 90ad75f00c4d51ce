"""The LightningModule base every domain's module subclasses (litlab.models.base.LitModule);
the domains' own modules and nets are in litlab.domains."""
