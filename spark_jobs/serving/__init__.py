"""The serving layer: ``serving.<view>`` answers "all days, up to now" from gold up to the batch watermark and
from a speed view over seconds-fresh silver after it (DESIGN.md, "Serving and replay")."""
