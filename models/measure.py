"""What ``predict`` and ``tune`` measure on the device: the site counts of a kernel on real inputs
(one counting launch, :func:`measure_site_counts`) and launches of tuning candidates
(:class:`HarnessMeasure`, the real-launch ``measure`` of :func:`models.tune.tune`).

The models themselves take the counts and the measurements as inputs; the command layer calls
these to obtain them.
"""

from __future__ import annotations

from kernelcast.instrument.backends import DeviceInfo, select_device
from kernelcast.instrument.counters import measure_counts
from kernelcast.instrument.harness import Harness
from kernelcast.instrument.memcheck import check_buffer_memory
from kernelcast.instrument.rewrite import InstrumentedRunError, RewriteError
from kernelcast.instrument.runner import validate_geometry

from kernelcast.argspec import arg_arrays
from kernelcast.config import device_spec
from kernelcast.errors import UsageError
from kernelcast.schema import Kernel, LaunchConfig, Measurement

#: most configurations ``predict --measure-counts`` runs the counting launch for
MAX_COUNT_CONFIGS = 64


def measure_site_counts(kernel: Kernel, configs: list[LaunchConfig], device_text: str | None
                        ) -> tuple[list[dict[str, float] | None], list[str]]:
    """One counting launch (:func:`instrument.counters.measure_counts`) per configuration, in one
    isolated worker on the device ``device_text`` names (auto when None), with each configuration's
    arguments and data (``NAME=@FILE.npy`` files included). Returns per configuration the site
    counts (None where they could not be measured) and notes on what failed."""
    if len(configs) > MAX_COUNT_CONFIGS:
        raise UsageError(f"--measure-counts: {len(configs)} configurations; at most {MAX_COUNT_CONFIGS} (measure "
                         f"once with 'kernelcast measure --counts --json' and pass the file with --counts)")
    device = select_device(device_spec(device_text), language=kernel.language)
    for c in configs:
        validate_geometry(device, c.gsize, c.lsize)
        check_buffer_memory(device, c.args)
    out: list[dict[str, float] | None] = []
    notes: list[str] = []
    with Harness(device, meter="none") as h:
        for c in configs:
            try:
                out.append(measure_counts(h, kernel, c, arrays=arg_arrays(c.args)).values())
            except (RewriteError, InstrumentedRunError) as e:
                out.append(None)
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                if msg not in notes:
                    notes.append(msg)
    return out, notes


class HarnessMeasure:
    """Measures configurations by real launches in the isolated harness on the device
    ``device_text`` names (auto when None), energy metered where a meter exists. The device is
    selected and the harness opened at the first launch (nothing is opened when nothing is
    measured); :meth:`close` (or leaving the ``with`` block) ends the worker."""

    def __init__(self, device_text: str | None = None, meter: str = "auto") -> None:
        self.device_text = device_text
        self.meter = meter
        self.device: DeviceInfo | None = None
        self._harness: Harness | None = None

    @property
    def device_name(self) -> str:
        return self.device.name if self.device is not None else ""

    def __call__(self, kernel: Kernel, config: LaunchConfig) -> Measurement:
        if self._harness is None:
            self.device = select_device(device_spec(self.device_text))
            self._harness = Harness(self.device, meter=self.meter)
        return self._harness.run(kernel, config)

    def close(self, exc_type: object = None) -> None:
        if self._harness is not None:
            self._harness.__exit__(exc_type)        # Ctrl-C stops the worker at once
            self._harness = None

    def __enter__(self) -> HarnessMeasure:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(exc_type)
