from django.apps import AppConfig


class ExtensionAppConfig(AppConfig):
    name = "tests.extension_app"
    label = "extension_app"
    verbose_name = "Sign-offs (a test-only extension of the runtime)"

    def ready(self) -> None:
        from runs import extensions
        from runs.extensions import NodeKind
        from runs.timeline import timeline_sentence_register
        from runs.tools import tool_register
        from tests.extension_app import parcels, signoff, voucher

        extensions.interrupt_register(signoff.SIGNOFF_INTERRUPT)
        extensions.node_register(NodeKind(signoff.AUDIT_NODE, signoff.audit_step))
        extensions.script_register(signoff.signoff_script, name=signoff.SCRIPT)
        tool_register(signoff.REQUEST_SIGNOFF)
        timeline_sentence_register("signoff.requested", signoff.signoff_requested_sentence)
        extensions.script_register(voucher.voucher_script, name=voucher.SCRIPT)
        tool_register(voucher.GRANT_VOUCHER)
        extensions.script_register(parcels.parcels_script, name=parcels.SCRIPT)
        tool_register(parcels.TRACK_PARCEL)
        tool_register(parcels.FIND_LOCKER)
        tool_register(parcels.ASK_WHICH_PARCEL)
        tool_register(parcels.ASK_COURIER)
