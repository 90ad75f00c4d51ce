"""Images, one class each: digits (offline default), MNIST, Fashion-MNIST, CIFAR-10 and a
user's image folders; a small CNN and ResNet-18."""
