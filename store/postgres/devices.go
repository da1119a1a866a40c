package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/store"
)

// A recipient's push devices (store.Devices). Every statement is one
// autocommitted statement that finds its rows by the primary key
// (tenant, recipient, device_id) or its (tenant, recipient) prefix.
const (
	// qDevicePut registers a token, or writes it again: the platform, and
	// active again whatever it was. xmax is 0 on a row this statement
	// inserted and not on one it updated. $1 now; updated_at moves forward
	// by a microsecond at least, so a write in the same microsecond as the
	// read a deactivation compares with still counts (qDeviceDeactivate).
	//
	// With a digest ($7), it deletes the tenant's other recipients' rows
	// of that token in the same statement (devices_token_digest,
	// migration 40) and returns how many.
	qDevicePut = `WITH moved AS (
    DELETE FROM devices o WHERE $7::text <> '' AND o.tenant = $2::text AND o.token_digest = $7::text AND o.recipient <> $3::text
    RETURNING 1
)
INSERT INTO devices AS d (tenant, recipient, device_id, token, platform, active, created_at, updated_at, token_digest)
VALUES ($2::text, $3::text, $4::text, $5::text, $6::text, true, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()), nullif($7::text, ''))
ON CONFLICT (tenant, recipient, device_id) DO UPDATE SET token = excluded.token, platform = excluded.platform, active = true,
    deactivated_at = NULL, deactivated_reason = '',
    updated_at = greatest(excluded.updated_at, d.updated_at + interval '1 microsecond'), token_digest = coalesce(excluded.token_digest, d.token_digest)
RETURNING d.xmax = 0, (SELECT count(*) FROM moved)`
	qDeviceDelete = `DELETE FROM devices WHERE tenant = $1::text AND recipient = $2::text AND device_id = $3::text`
	// $1 now, $5 reason, $6 the updated_at the caller read (NULL: any).
	qDeviceDeactivate = `UPDATE devices
SET active = false, deactivated_at = coalesce($1::timestamptz, now()), deactivated_reason = $5::text, updated_at = coalesce($1::timestamptz, now())
WHERE tenant = $2::text AND recipient = $3::text AND device_id = $4::text AND active
    AND ($6::timestamptz IS NULL OR updated_at = $6::timestamptz)`
	qDeviceColumns = `tenant, recipient, device_id, token, platform, active, created_at, updated_at, deactivated_at, deactivated_reason`
	qDeviceGet     = `SELECT ` + qDeviceColumns + ` FROM devices WHERE tenant = $1::text AND recipient = $2::text AND device_id = $3::text`
	qDevicesList   = `SELECT ` + qDeviceColumns + ` FROM devices WHERE tenant = $1::text AND recipient = $2::text ORDER BY device_id`
)

// DevicePut registers a device or writes its row again, active.
func (s *Store) DevicePut(ctx context.Context, d store.Device) (bool, int, error) {
	var created bool
	var moved int
	err := s.pool.QueryRow(ctx, qDevicePut, s.now(), d.Tenant, d.Recipient, d.DeviceID, d.Token, string(d.Platform), d.TokenDigest).Scan(&created, &moved)
	if err != nil {
		return false, 0, s.fail("put device", err)
	}
	return created, moved, nil
}

// DeviceDelete deletes a device.
func (s *Store) DeviceDelete(ctx context.Context, tenant, recipient, deviceID string) (bool, error) {
	tag, err := s.pool.Exec(ctx, qDeviceDelete, tenant, recipient, deviceID)
	if err != nil {
		return false, s.fail("delete device", err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeviceDeactivate marks an active device inactive, unless it was written
// since p.UpdatedAt.
func (s *Store) DeviceDeactivate(ctx context.Context, p store.DeviceDeactivateParams) (bool, error) {
	var read *time.Time
	if !p.UpdatedAt.IsZero() {
		read = &p.UpdatedAt
	}
	tag, err := s.pipe.Exec(ctx, qDeviceDeactivate, s.now(), p.Tenant, p.Recipient, p.DeviceID, p.Reason, read)
	if err != nil {
		return false, s.fail("deactivate device", err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeviceGet reads one device.
func (s *Store) DeviceGet(ctx context.Context, tenant, recipient, deviceID string) (store.Device, error) {
	d, err := scanDevice(s.pipe.QueryRow(ctx, qDeviceGet, tenant, recipient, deviceID))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Device{}, store.ErrNotFound
	}
	if err != nil {
		return store.Device{}, s.fail("read device", err)
	}
	return d, nil
}

// DevicesList reads a recipient's devices.
func (s *Store) DevicesList(ctx context.Context, tenant, recipient string) ([]store.Device, error) {
	rows, err := s.pool.Query(ctx, qDevicesList, tenant, recipient)
	if err != nil {
		return nil, s.fail("list devices", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Device, error) { return scanDevice(row) })
	if err != nil {
		return nil, s.fail("list devices", err)
	}
	return out, nil
}

func scanDevice(row pgx.Row) (store.Device, error) {
	var d store.Device
	var platform string
	err := row.Scan(&d.Tenant, &d.Recipient, &d.DeviceID, &d.Token, &platform, &d.Active, &d.CreatedAt, &d.UpdatedAt, &d.DeactivatedAt, &d.DeactivatedReason)
	if err != nil {
		return store.Device{}, fmt.Errorf("scan device: %w", err)
	}
	d.Platform, d.CreatedAt, d.UpdatedAt, d.DeactivatedAt = store.Platform(platform), utc(d.CreatedAt), utc(d.UpdatedAt), utcPtr(d.DeactivatedAt)
	return d, nil
}
