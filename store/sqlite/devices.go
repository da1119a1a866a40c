package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// A recipient's push devices (store.Devices). Every statement finds its
// rows by the primary key (tenant, recipient, device_id) or its
// (tenant, recipient) prefix.
const (
	qDeviceExists = `SELECT count(*) FROM devices WHERE tenant = ?1 AND recipient = ?2 AND device_id = ?3`
	// qDevicePut registers a token, or writes it again: the platform, and
	// active again whatever it was. ?1 now; updated_at moves forward by a
	// millisecond at least, so a write in the same millisecond as the
	// read a deactivation compares with still counts (qDeviceDeactivate).
	qDevicePut = `INSERT INTO devices (tenant, recipient, device_id, token, platform, active, created_at, updated_at, token_digest)
VALUES (?2, ?3, ?4, ?5, ?6, 1, ?1, ?1, nullif(?7, ''))
ON CONFLICT (tenant, recipient, device_id) DO UPDATE SET token = excluded.token, platform = excluded.platform, active = 1,
    deactivated_at = NULL, deactivated_reason = '', updated_at = max(excluded.updated_at, devices.updated_at + 1),
    token_digest = coalesce(excluded.token_digest, devices.token_digest)`
	// qDeviceMove deletes the tenant's other recipients' rows of a token
	// (its digest, ?3; devices_token_digest, migration 36): the token is
	// ?2's now (store.Devices.DevicePut).
	qDeviceMove   = `DELETE FROM devices WHERE tenant = ?1 AND token_digest = ?3 AND recipient <> ?2`
	qDeviceDelete = `DELETE FROM devices WHERE tenant = ?1 AND recipient = ?2 AND device_id = ?3`
	// ?1 now, ?5 reason, ?6 the updated_at the caller read (0: any).
	qDeviceDeactivate = `UPDATE devices SET active = 0, deactivated_at = ?1, deactivated_reason = ?5, updated_at = ?1
WHERE tenant = ?2 AND recipient = ?3 AND device_id = ?4 AND active = 1 AND (?6 = 0 OR updated_at = ?6)`
	qDeviceColumns = `tenant, recipient, device_id, token, platform, active, created_at, updated_at, deactivated_at, deactivated_reason`
	qDeviceGet     = `SELECT ` + qDeviceColumns + ` FROM devices WHERE tenant = ?1 AND recipient = ?2 AND device_id = ?3`
	qDevicesList   = `SELECT ` + qDeviceColumns + ` FROM devices WHERE tenant = ?1 AND recipient = ?2 ORDER BY device_id`
)

// deviceQueries are the writer's device statements, cached by it
// (writeQueries): the create's read of the active devices runs on every
// push intake.
var deviceQueries = []string{qDevicesActive, qDeviceExists, qDevicePut, qDeviceMove, qDeviceDelete, qDeviceDeactivate}

// DevicePut registers a device or writes its row again, active.
func (s *Store) DevicePut(ctx context.Context, d store.Device) (bool, int, error) {
	var created bool
	var moved int64
	err := s.w.do(ctx, func(tx wtx) error {
		var n int
		if err := tx.QueryRow(qDeviceExists, d.Tenant, d.Recipient, d.DeviceID).Scan(&n); err != nil {
			return err
		}
		created, moved = n == 0, 0
		if d.TokenDigest != "" {
			r, err := tx.Exec(qDeviceMove, d.Tenant, d.Recipient, d.TokenDigest)
			if err != nil {
				return err
			}
			if moved, err = r.RowsAffected(); err != nil {
				return err
			}
		}
		_, err := tx.Exec(qDevicePut, s.now(), d.Tenant, d.Recipient, d.DeviceID, d.Token, string(d.Platform), d.TokenDigest)
		return err
	})
	if err != nil {
		return false, 0, fmt.Errorf("put device: %w", err)
	}
	return created, int(moved), nil
}

// DeviceDelete deletes a device.
func (s *Store) DeviceDelete(ctx context.Context, tenant, recipient, deviceID string) (bool, error) {
	return s.deviceWrite(ctx, "delete device", qDeviceDelete, tenant, recipient, deviceID)
}

// DeviceDeactivate marks an active device inactive, unless it was written
// since p.UpdatedAt.
func (s *Store) DeviceDeactivate(ctx context.Context, p store.DeviceDeactivateParams) (bool, error) {
	var read int64
	if !p.UpdatedAt.IsZero() {
		read = p.UpdatedAt.UnixMilli()
	}
	return s.deviceWrite(ctx, "deactivate device", qDeviceDeactivate, s.now(), p.Tenant, p.Recipient, p.DeviceID, p.Reason, read)
}

// deviceWrite runs one write and reports whether it changed a row.
func (s *Store) deviceWrite(ctx context.Context, what, q string, args ...any) (bool, error) {
	var n int64
	err := s.w.do(ctx, func(tx wtx) error {
		r, err := tx.Exec(q, args...)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return n == 1, nil
}

// DeviceGet reads one device.
func (s *Store) DeviceGet(ctx context.Context, tenant, recipient, deviceID string) (store.Device, error) {
	d, err := scanDevice(s.queryRow(ctx, qDeviceGet, tenant, recipient, deviceID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Device{}, store.ErrNotFound
	}
	if err != nil {
		return store.Device{}, fmt.Errorf("read device: %w", err)
	}
	return d, nil
}

// DevicesList reads a recipient's devices.
func (s *Store) DevicesList(ctx context.Context, tenant, recipient string) ([]store.Device, error) {
	rows, err := s.query(ctx, qDevicesList, tenant, recipient)
	if err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	defer rows.Close()
	var out []store.Device
	for rows.Next() {
		d, err := scanDevice(rows)
		if err != nil {
			return nil, fmt.Errorf("list devices: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	return out, nil
}

func scanDevice(row interface{ Scan(...any) error }) (store.Device, error) {
	var d store.Device
	var platform string
	var created, updated int64
	var deactivated sql.NullInt64
	err := row.Scan(&d.Tenant, &d.Recipient, &d.DeviceID, &d.Token, &platform, &d.Active, &created, &updated, &deactivated, &d.DeactivatedReason)
	d.Platform, d.CreatedAt, d.UpdatedAt, d.DeactivatedAt = store.Platform(platform), fromMs(created), fromMs(updated), fromNullMs(deactivated)
	return d, err
}

// qDevicesActive lists a recipient's active devices as one JSON array (one
// row, so a create reads it with QueryRow).
const qDevicesActive = `SELECT json_group_array(device_id) FROM devices WHERE tenant = ?1 AND recipient = ?2 AND active = 1`

// plannedSends returns the sends a create plans for channel ch, as the
// channels of their outbox rows: ch itself, or for the push channel of a
// recipient with active devices, one per device (heraldtype.DeviceSend),
// read in the create's transaction. A recipient with none keeps the one
// push send, addressed from the profile at send time.
func plannedSends(tx execer, p store.NotificationCreateParams, ch heraldtype.Channel) ([]heraldtype.Channel, error) {
	if ch != heraldtype.ChannelPush {
		return []heraldtype.Channel{ch}, nil
	}
	var list string
	if err := tx.QueryRow(qDevicesActive, p.Tenant, p.Recipient).Scan(&list); err != nil {
		return nil, fmt.Errorf("read active devices: %w", err)
	}
	var ids []string
	if err := json.Unmarshal([]byte(list), &ids); err != nil {
		return nil, fmt.Errorf("read active devices: %w", err)
	}
	if len(ids) == 0 {
		return []heraldtype.Channel{ch}, nil
	}
	slices.Sort(ids)
	sends := make([]heraldtype.Channel, len(ids))
	for i, id := range ids {
		sends[i] = heraldtype.DeviceSend(ch, id)
	}
	return sends, nil
}
