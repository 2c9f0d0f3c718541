"""A pruned, saved and reloaded backbone as a segmentation_models_pytorch encoder: smp's decoders build on it by name,
their logits come at the images' size, and one batch trains (the loss falls, gradients reach the backbone)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from conftest import build, shallow
from test_segmentation import CHANNELS, SIZE, _backbone, assert_fits

import vitprune
from vitprune.data import CLUTTERED_DENSE, ClutteredDenseDataset, collate_dense
from vitprune.dense import PrunedEncoder, register_encoder
from vitprune.surgery import prune_depth, prune_mlp_neurons, prune_tokens, set_input_size

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="needs vitprune[bench]")
smp = pytest.importorskip("segmentation_models_pytorch", reason="needs vitprune[dense]")

PRUNINGS = {
    "depth": lambda model: prune_depth(model, attention=[1]),
    "width": lambda model: prune_mlp_neurons(
        model, 0, list(range(0, vitprune.get_adapter(model).block(0).mlp.hidden_features, 2))),
    "tokens": lambda model: prune_tokens(model, 1, 0.5),
}
#: Small decoders, so that a few steps fit one batch quickly.
HEADS = {
    "Unet": {"decoder_channels": (32, 16, 16, 8, 8)},
    "FPN": {"decoder_pyramid_channels": 32, "decoder_segmentation_channels": 32},
    "Segformer": {"decoder_segmentation_channels": 32},
}
#: Every head on every pruning of the plain ViT (through ViTDet's pyramid), and one pair on Swin's own stages.
CASES = [("deit", head, pruning) for head in HEADS for pruning in PRUNINGS] + [("swin", "Unet", "width")]


@pytest.fixture(scope="module")
def batch():
    images, targets = collate_dense([ClutteredDenseDataset("val")[i] for i in range(4)])
    return images, torch.stack([t["mask"] for t in targets]).long()


def _reloaded(family: str, pruning: str, tmp_path) -> str:
    model = _backbone(family)
    PRUNINGS[pruning](model)
    vitprune.save(model, tmp_path / "pruned")
    return str(tmp_path / "pruned")


@pytest.mark.parametrize(("family", "head", "pruning"), CASES)
def test_smp_heads_train_on_a_pruned_reloaded_backbone(family, head, pruning, batch, tmp_path):
    images, masks = batch
    register_encoder(f"vitprune-test-{pruning}", _reloaded(family, pruning, tmp_path), pyramid_channels=16)
    torch.manual_seed(0)
    model = getattr(smp, head)(f"vitprune-test-{pruning}", encoder_weights=None, in_channels=CHANNELS,
                               classes=CLUTTERED_DENSE.num_classes, **HEADS[head])
    assert isinstance(model.encoder, PrunedEncoder)
    assert model(images).shape == (4, CLUTTERED_DENSE.num_classes, SIZE, SIZE)
    backbone = (model.encoder.backbone.maps if family == "deit" else model.encoder.backbone).model
    assert_fits(backbone, model, lambda: F.cross_entropy(model(images), masks), steps=15, lr=3e-3)


@pytest.mark.parametrize("family", ["deit", "swin"])
def test_the_encoder_gives_smps_strides(family):
    """The input, an empty map at stride 2, then maps at strides 4 to 32: a plain ViT's from ViTDet's pyramid, a
    staged family's its own stages (their channels as the model gives them); ``depth`` keeps the first maps."""
    model = _backbone(family)
    encoder = PrunedEncoder(model, pyramid_channels=16)
    maps = encoder(torch.randn(2, CHANNELS, SIZE, SIZE))
    assert [m.shape[-1] for m in maps] == [SIZE // s for s in (1, 2, 4, 8, 16, 32)]
    assert [m.shape[1] for m in maps] == encoder.out_channels
    expected = [16] * 4 if family == "deit" else vitprune.FeatureMaps(model).channels
    assert encoder.out_channels == [CHANNELS, 0, *expected] and encoder.output_stride == 32
    shallow = PrunedEncoder(model, depth=3, pyramid_channels=16)
    assert [m.shape[-1] for m in shallow(torch.randn(1, CHANNELS, SIZE, SIZE))] == [SIZE, SIZE // 2, SIZE // 4,
                                                                                    SIZE // 8]
    assert shallow.out_channels == [CHANNELS, 0, *expected[:2]] and shallow.output_stride == 8
    pixels = PrunedEncoder(model, pyramid_channels=16, pixels=True)
    pixels.load_state_dict(encoder.state_dict())
    pixels.eval()  # one model under both encoders; Swin's stages differ from call to call in training
    images = torch.randn(2, CHANNELS, SIZE, SIZE)
    with_pixels, plain = pixels(images), encoder(images)
    assert pixels.out_channels == [CHANNELS, 4 * CHANNELS, *expected]
    assert torch.equal(with_pixels[1], F.pixel_unshuffle(images, 2))
    assert all(torch.equal(a, b) for a, b in zip(with_pixels[2:], plain[2:]))
    assert all(torch.equal(a, b) for a, b in zip(pixels.encoded(images, pixels.backbone(images)), with_pixels))


def test_a_unet_reads_the_pixels_at_stride_2(batch):
    """With ``pixels``, smp's Unet takes the images' 2x2 blocks as its last skip: its logits move with the pixels
    while the backbone's maps are held, and it trains."""
    images, masks = batch
    model = _backbone("deit")
    register_encoder("vitprune-test-pixels", model, pyramid_channels=16, pixels=True)
    torch.manual_seed(0)
    unet = smp.Unet("vitprune-test-pixels", encoder_weights=None, in_channels=CHANNELS,
                    classes=CLUTTERED_DENSE.num_classes, **HEADS["Unet"])
    maps = [m.detach() for m in unet.encoder(images)[2:]]
    held = images.clone().requires_grad_(True)
    unet.segmentation_head(unet.decoder(unet.encoder.encoded(held, maps))).square().sum().backward()
    assert held.grad.abs().sum() > 0
    assert_fits(unet.encoder.backbone.maps.model, unet, lambda: F.cross_entropy(unet(images), masks), steps=15,
                lr=3e-3)


def test_a_plain_vit_keeps_the_resolution_smps_dilated_encoders_keep(tmp_path):
    """DeepLabV3 asks for an output stride of 8: the plain ViT's pyramid stops at stride 8; a staged family's
    stages cannot, and say so."""
    register_encoder("vitprune-test-deeplab", _reloaded("deit", "depth", tmp_path), pyramid_channels=16)
    model = smp.DeepLabV3("vitprune-test-deeplab", encoder_weights=None, in_channels=CHANNELS,
                          classes=CLUTTERED_DENSE.num_classes, decoder_channels=16)
    assert model.encoder.output_stride == 8
    maps = model.encoder(torch.randn(1, CHANNELS, SIZE, SIZE))
    assert [m.shape[-1] for m in maps][2:] == [SIZE // 4] + [SIZE // 8] * 3
    assert model(torch.randn(2, CHANNELS, SIZE, SIZE)).shape == (2, CLUTTERED_DENSE.num_classes, SIZE, SIZE)
    register_encoder("vitprune-test-swin", _backbone("swin"))
    with pytest.raises(ValueError, match="cannot be dilated to an output stride of 8"):
        smp.DeepLabV3("vitprune-test-swin", encoder_weights=None, in_channels=CHANNELS)


def test_registration_copies_the_model_and_refuses_what_cannot_work():
    model = _backbone("deit")
    register_encoder("vitprune-test-module", model, pyramid_channels=16)
    first = smp.Unet("vitprune-test-module", encoder_weights=None, in_channels=CHANNELS)
    second = smp.Unet("vitprune-test-module", encoder_weights=None, in_channels=CHANNELS)
    first_model, second_model = first.encoder.backbone.maps.model, second.encoder.backbone.maps.model
    assert first_model is not model and first_model is not second_model
    assert torch.equal(vitprune.get_adapter(first_model).block(0).mlp.fc1.weight,
                       vitprune.get_adapter(model).block(0).mlp.fc1.weight)
    with pytest.raises(ValueError, match=f"takes {CHANNELS}-channel images, not 3"):
        smp.Unet("vitprune-test-module", encoder_weights=None)
    with pytest.raises(ValueError, match="smp already has an encoder named 'resnet18'"):
        register_encoder("resnet18", model)
    with pytest.raises(ValueError, match="depth is 1 to 5"):
        PrunedEncoder(model, depth=6)


#: The test matrix's models smp's layout cannot take as they are, and why: DINOv2's 14-px patches are no power of
#: two (taken with images resized to it, ``image_size``), and the tiny Swin's 2-px patches put its stages at strides
#: 2 to 16.
REFUSED = {"vit_small_patch14_dinov2": "patch size on the images", "swin_tiny_patch4_window7_224":
           "strides 2, 4, 8, 16;"}


@pytest.mark.needs("dense_features")
def test_every_family_gives_smps_layout_or_says_why_not(small_model_spec):
    name, kwargs = small_model_spec
    model = build(name, shallow(name, kwargs, 3))
    channels, size, _ = vitprune.get_adapter(model).input_size
    image = size
    if name in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[name]):
            PrunedEncoder(model)
        if "dinov2" not in name:
            return
        image = size // 14 * 16
    encoder = PrunedEncoder(model, pyramid_channels=8, image_size=image)
    with torch.no_grad():
        maps = encoder(torch.randn(1, channels, image, image))
    assert [image // m.shape[-1] for m in maps] == [1, 2, 4, 8, 16, 32]
    assert [m.shape[1] for m in maps] == encoder.out_channels and encoder.out_channels[:2] == [channels, 0]


def test_images_resized_to_the_backbone_count_strides_in_their_own_pixels():
    """The 40-px cluttered-MNIST ViT's 5-px patches on 64-px canvases: the backbone resized to 80 px (16x16 cells)
    takes them at stride 4, smp's FPN decodes them, and a canvas of another size is refused in one line."""
    kwargs = {"img_size": 40, "patch_size": 5, "embed_dim": 32, "depth": 2, "num_heads": 2, "in_chans": CHANNELS,
              "num_classes": 10}
    model = vitprune.track(build("deit_tiny_patch16_224", kwargs), "deit_tiny_patch16_224", **kwargs)
    with pytest.raises(ValueError, match=r"e\.g\. 32 \(8 cells\)"):
        PrunedEncoder(model)
    set_input_size(model, 80, 80)
    encoder = PrunedEncoder(model, pyramid_channels=8, image_size=64)
    maps = encoder(torch.randn(2, CHANNELS, 64, 64))
    assert [m.shape[-1] for m in maps] == [64, 32, 16, 8, 4, 2]
    with pytest.raises(ValueError, match="takes 64x64 images \\(image_size\\), not 80x80"):
        encoder(torch.randn(1, CHANNELS, 80, 80))
    with pytest.raises(ValueError, match="not square"):
        PrunedEncoder(model, image_size=(64, 48))
