"""The generic device class: any device no other registered class takes (an accelerator, a device
type the profile does not name). One work-group per compute unit at the profile's peak rates,
compute and memory overlapped: the defaults of :class:`~.registry.DeviceClass`."""

from __future__ import annotations

from kernelcast.models.analytical.registry import DeviceClass, DeviceKind, register


@register
class GenericClass(DeviceClass):
    """The shared roofline alone."""

    name = "generic"
    priority = -1000

    @classmethod
    def matches(cls, kind: DeviceKind) -> bool:
        return True
