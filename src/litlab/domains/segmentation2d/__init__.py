"""2D segmentation: axial slices of the Hippocampus volumes (split by volume) and a
user's images/ + masks/ folders; a 2D U-Net, Dice per whole item."""
