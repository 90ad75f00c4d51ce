"""3D volumes: phantoms, MedMNIST 3D, the MSD Hippocampus NIfTI files and a user's NIfTI
folders; classification (ResNet3D) and segmentation (UNet3D, patches and sliding windows)."""
