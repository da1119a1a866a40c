-- A recipient's push devices (store.Devices). The push channel sends to
-- each active device, one planned send each (message id
-- <notification id>.push.<device_id>); the sender reads the row again at
-- send time, so a device deleted or deactivated since intake gets nothing.
-- device_id is store.DeviceID of the token: short, stable, and the same for
-- the same token registered again. A provider answer that says the token is
-- dead makes the row inactive with its reason code; registering the token
-- again makes it active. Intake reads a recipient's active devices by the
-- primary key's (tenant, recipient) prefix, in the create's statement.
CREATE TABLE devices (
    tenant             text NOT NULL,
    recipient          text NOT NULL,
    device_id          text NOT NULL,
    token              text NOT NULL,
    platform           text NOT NULL CHECK (platform IN ('fcm', 'apns', 'web')),
    active             boolean NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    deactivated_at     timestamptz,
    deactivated_reason text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, recipient, device_id)
);
